"""The local stack as `make run` starts it (test_run.py's `stack` fixture: the
`mailqueue_local.run` entry point as a subprocess), for every end-to-end test here."""

from tests.local.test_run import stack  # noqa: F401  (the fixture)
