"""Known-wrong backends: each module turns on one classic bug of impl.BUGS; the harness must reject
every one (tests/test_harness_check.py, test_every_known_wrong_backend_is_rejected), and accept impl with
no bug (module `correct`)."""
