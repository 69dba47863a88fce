# added (not upstream): upstream also imports .misc and .evaluator (trainer hooks: wandb, tensorboard, ...);
# models/modules.py needs only HookBase from .default.
from .default import *

from .builder import build_hooks
