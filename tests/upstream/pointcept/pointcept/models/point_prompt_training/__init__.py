# added (not upstream): upstream also imports the three Point Prompt Training models (v1m1-v1m3).
from .prompt_driven_normalization import PDNorm
