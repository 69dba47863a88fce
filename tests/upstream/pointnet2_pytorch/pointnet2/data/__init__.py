# Stand-in (not upstream): the datasets need h5py and downloads; the models only import these names.
Indoor3DSemSeg = None
