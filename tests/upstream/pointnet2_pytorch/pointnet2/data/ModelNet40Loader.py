# Stand-in (not upstream): the dataset class, unused by the model code under test.
ModelNet40Cls = None
