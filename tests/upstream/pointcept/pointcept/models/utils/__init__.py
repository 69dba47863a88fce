# added (not upstream): upstream also imports .checkpoint and .serialization, which these models do not use.
from .misc import (
    offset2batch,
    offset2bincount,
    bincount2offset,
    batch2offset,
    off_diagonal,
)
