"""The trainer: MutexMatch and the other semi-supervised algorithms, trained from a validated config.

No Ray and no MLflow here (``orchestration`` drives the trainer through :mod:`mutexmatch.training`'s callbacks).

- :mod:`mutexmatch.config`: the run schema, its files and ``--set``, the config hashes, the generated reference
- :mod:`mutexmatch.data`: datasets (one module each under ``data/builtin/``), splits, sampler, augmentation, prefetch
- :mod:`mutexmatch.models`: backbones (one module each, ``@register_backbone``) and the MutexMatch network
- :mod:`mutexmatch.algorithms`: one module per algorithm (``@register_algorithm``) and its parameter model
- :mod:`mutexmatch.training`: the loop and its helpers, one job per module; its ``__init__`` is the public surface
- leaf modules the rest builds on: :mod:`~mutexmatch.losses` (Algorithm 1's losses), :mod:`~mutexmatch.selection`,
  :mod:`~mutexmatch.params`, :mod:`~mutexmatch.registry` (how a config-named class joins its registry),
  :mod:`~mutexmatch.metrics` (metric names), :mod:`~mutexmatch.checks`,
  :mod:`~mutexmatch.dotted`, :mod:`~mutexmatch.atomic`, :mod:`~mutexmatch.checksum`, :mod:`~mutexmatch.yamlfile`,
  :mod:`~mutexmatch.cliwarnings`, :mod:`~mutexmatch.cli` (how every command line ends on an unforeseen error)
- :mod:`mutexmatch.classifier`: a trained run's EMA weights as a classifier of new images
- :mod:`mutexmatch.plugins`: algorithms, datasets and backbones from outside the package (``plugins:``, entry points)
- the command lines, thin faces: ``python -m mutexmatch.train`` (:mod:`mutexmatch.train`), ``mutexmatch.datasets``,
  ``mutexmatch.fakedata``, ``mutexmatch.config``, ``mutexmatch.predict``
"""
