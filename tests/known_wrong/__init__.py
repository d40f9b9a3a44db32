"""Known-wrong backends: each module turns on one classic bug of impl.BUGS; the harness must reject
every one (tests/test_known_wrong.py), and accept impl with no bug (module `correct`)."""
