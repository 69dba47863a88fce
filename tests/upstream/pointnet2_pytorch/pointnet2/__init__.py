# Stand-in (not upstream): the upstream package __init__ only sets the version.
