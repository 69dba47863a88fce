# Stand-in (not upstream): data augmentation, unused by the model code under test.
