# Sourced by nightly.sh and sanitize.sh: the GPUs this job may use, as CUDA_VISIBLE_DEVICES names them.
# A runner that assigns GPUs to a job sets CUDA_VISIBLE_DEVICES; a shard i of the job then takes entry
# i mod count of that list (`gpu_for i`), so the job stays on the GPUs it was given (the physical index i
# would escape them). Without a mask: every GPU nvidia-smi lists, 0..n-1. gpu_count is 0 without a GPU.
gpu_ids=()
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    IFS=',' read -r -a _masked <<<"${CUDA_VISIBLE_DEVICES// /}"
    for _id in "${_masked[@]}"; do
        [ -n "$_id" ] && gpu_ids+=("$_id")
    done
else
    _n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    for ((_i = 0; _i < ${_n:-0}; _i++)); do gpu_ids+=("$_i"); done
fi
gpu_count=${#gpu_ids[@]}
gpu_for() { echo "${gpu_ids[$(($1 % gpu_count))]}"; }
