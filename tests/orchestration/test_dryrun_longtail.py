"""The dry run measures a long-tailed cell (issue 41 item 1): its generated data has a few hundred images per class,
fewer than CIFAR-10-LT's head class asks (500 labeled + 4,000 unlabeled), so the cell was refused as one that
"cannot train". A step's cost does not depend on which images are labeled (B labeled and muB unlabeled per step),
so the measurement draws a balanced split of the generated data instead."""

from __future__ import annotations

from mutexmatch.data.longtail import imbalance_counts

LT = {"labeled_head": 500, "labeled_ratio": 100, "unlabeled_head": 4000, "unlabeled_ratio": -100}


def test_a_long_tailed_cifar_cell_is_measured_on_generated_data(tmp_path):
    from orchestration.launch.dryrun import _Estimator

    raw = {"data": {"dataset": "cifar10", "num_labels": sum(imbalance_counts(500, 100, 10)), "fold": 2,
                    "imbalance": LT},
           "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
           "train": {"iterations": 2, "eval_interval": 2, "batch_size": 2, "mu": 1, "num_threads": 1}}
    est = _Estimator("cpu", 1, tmp_path)
    got = est.trial(raw, 2, 1)
    assert not got.crashed and got.seconds is not None, got
