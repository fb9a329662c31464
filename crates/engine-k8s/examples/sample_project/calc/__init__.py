"""A tiny calculator, the project the git_repo example tests inside a sandbox."""


def add(a, b):
    return a + b


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)
