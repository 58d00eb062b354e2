"""A helper file next to model.py: imported as a top-level module, as in Triton."""


def triple(array):
    return array * 3
