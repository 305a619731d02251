"""A tiny calculator module: the code an agent is asked to work on."""


def add(a, b):
    return a + b


def mean(values):
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)
