# Stand-in for torchvision (see ../README.md).
