# Stand-in (not upstream) for Point-MAE's models/build.py: its registry pulls in utils.config (yaml,
# easydict).  Only the decorator the model file uses is provided.
class _Registry:
    def __init__(self):
        self.modules = {}

    def register_module(self):
        def deco(cls):
            self.modules[cls.__name__] = cls
            return cls

        return deco


MODELS = _Registry()
