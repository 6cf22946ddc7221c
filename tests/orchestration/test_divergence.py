"""A diverging trial is not retried (issue 33 item 6, sweep-nan): Tune restarted it twice from its last checkpoint
(``mutexmatch.attempts=3``) and printed three tracebacks, while a divergence fails the same way each time."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from orchestration import contract as C

SPEC = """name: diverge
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  train: {{iterations: 4, eval_interval: 2, batch_size: 4, mu: 2, checkpoint_every: 2}}
folds: [0]
axes:
  method:
    diverge: {{algorithm: {{name: fixmatch, lambda_p: 1.0e+300}}}}
"""


@pytest.mark.heavy  # one real sweep on Ray (~1-2 min on 2 shared cores)
def test_a_diverging_trial_fails_once_with_its_line_and_is_not_retried(tmp_path, data_root, run_cli) -> None:
    (tmp_path / "diverge.yaml").write_text(SPEC.format(root=data_root))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run_cli(tmp_path, "diverge.yaml", "--tracking-uri", uri, "--storage", str(tmp_path / "rr"), timeout=400)
    assert result.returncode == 1, result.output
    assert "Traceback" not in result.output, result.output
    assert "non-finite loss term 'loss' at step 0 (algorithm fixmatch)" in result.output, result.output
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("diverge")
    (run,) = client.search_runs([exp.experiment_id], f"tags.`{C.ROLE}` = 'trial'")
    assert run.info.status == "FAILED" and run.data.tags[C.ATTEMPTS] == "1", run.data.tags
    assert "the largest weighted one is 'p' (weight 1e+300)" in run.data.tags[C.ERROR]
