"""Sweeps of mutexmatch runs on Ray Tune with Optuna search and MLflow tracking.

``python -m orchestration.sweep experiments/<name>.yaml`` — see ``orchestration/README.md``. Nothing is imported
here, so ``import orchestration.spec.sweepfile`` stays light (no Ray, no MLflow).
"""
