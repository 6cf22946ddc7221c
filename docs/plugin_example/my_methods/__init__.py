"""my_methods: a method, a dataset and a backbone of one's own, kept outside mutexmatch (docs/plugins.md).

Importing the package registers all three; name it in a config's or a sweep YAML's ``plugins:`` (or install it with
an entry point in the group ``mutexmatch.plugins``).
"""
from my_methods.data import MyDigits
from my_methods.methods import MyFixMatch
from my_methods.nets import tiny_cnn

__all__ = ["MyDigits", "MyFixMatch", "tiny_cnn"]
