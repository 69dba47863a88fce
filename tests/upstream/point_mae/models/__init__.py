# Stand-in (not upstream): the upstream file imports every model with its registry; the test imports
# models.Point_MAE directly.
