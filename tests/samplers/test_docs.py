"""The sampler example in the package docstring runs and gives the documented answer."""

import doctest

import bdeeponet.samplers


def test_sampler_docstring_example_runs():
    result = doctest.testmod(bdeeponet.samplers, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0
