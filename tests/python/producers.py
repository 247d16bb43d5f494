"""Test helpers shared by the Python suites."""


class Producer:
    """A DLPack producer that is not numpy (it lends a numpy array's capsule)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
