# Stand-in (not upstream) for Point-MAE's utils/checkpoint.py (needs termcolor): the two names
# models/Point_MAE.py imports, used only when loading a checkpoint.
def get_missing_parameters_message(keys):
    return "missing: " + ", ".join(keys)


def get_unexpected_parameters_message(keys):
    return "unexpected: " + ", ".join(keys)
