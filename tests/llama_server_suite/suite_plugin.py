"""A pytest plugin the harness loads beside the test files (`-p suite_plugin`).

Their session fixture starts every preset once to download its model; here
nothing is downloaded (each preset's model is a local file, or the preset has
none and only its own tests fail), so that step does nothing.
"""


def pytest_sessionstart(session):
    import utils  # the test files' own, from the folder pytest runs in

    utils.ServerPreset.load_all = staticmethod(lambda: None)
