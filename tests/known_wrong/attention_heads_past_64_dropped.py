from tests.known_wrong.impl import make_backend

(compress, indexer_logits, topk_indices, sparse_attention,
 sparse_attention_fp8) = make_backend("attention_heads_past_64_dropped")
