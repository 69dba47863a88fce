# Stand-in for torchvision.transforms (see ../README.md): imported by the model files, not used.
