# Stand-in (not upstream): the upstream file also imports the MSG models, which are not vendored.
