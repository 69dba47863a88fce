# added (not upstream): upstream also imports .checkpoint and .serialization (PTv3's structure.py imports
# .serialization by its own path; nothing here needs .checkpoint).
from .misc import (
    offset2batch,
    offset2bincount,
    bincount2offset,
    batch2offset,
    off_diagonal,
)
