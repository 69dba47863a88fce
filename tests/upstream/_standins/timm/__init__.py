# Stand-in for timm (see ../README.md).
