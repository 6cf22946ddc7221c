"""mydigits: scikit-learn's digits under a name of its own (a dataset declares its facts beside its reader)."""
import dataclasses

from mutexmatch.data.builtin.digits import Digits
from mutexmatch.data.registry import register_dataset


@register_dataset
class MyDigits(Digits):
    info = dataclasses.replace(Digits.info, name="mydigits")
    folder = "mydigits"
