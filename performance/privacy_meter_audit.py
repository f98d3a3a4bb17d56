"""privacy-meter 1.0.1's reference attack on models and candidates saved by ``performance/mia.py``.

Run by ``performance/mia.py --privacy-meter-python PATH`` under the interpreter of a separate venv
that has ``privacy-meter`` (it is not a dependency of this project, and this file imports
nothing from ``bench``)::

    python privacy_meter_audit.py IN.pt OUT.json THREADS

``IN.pt`` (``torch.save``): the target and reference ``nn.Module`` s, the members ``x_in, y_in``
(the target's training samples), the non-members ``x_out, y_out`` and the grid of levels
``alphas``. For each threshold function (``linear_itp_threshold_func``, the default of
``Audit``'s ``MetricEnum.REFERENCE``; ``logit_rescale_threshold_func``, the offline-LiRA form)
it builds privacy-meter's ``Dataset`` (splits ``train``/``test``), ``PytorchModelTensor`` s,
``InformationSource`` s, a ``ReferenceMetric`` with the ``ModelLoss`` signal and an ``Audit``
(``PRIVACY_LOSS_MODEL`` game, no log files), times ``prepare()`` + ``run()``, and writes its
``roc_auc`` and, per candidate, at how many levels of the grid it was called a member (the calls
are nested in ``α``, so the count orders the candidates as the test does).
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version

import torch


def main(path_in: str, path_out: str, threads: int) -> None:
    torch.set_num_threads(threads)
    start = time.perf_counter()
    import tensorflow as tf
    from privacy_meter.audit import Audit
    from privacy_meter.constants import InferenceGame
    from privacy_meter.dataset import Dataset
    from privacy_meter.hypothesis_test import linear_itp_threshold_func, logit_rescale_threshold_func
    from privacy_meter.information_source import InformationSource
    from privacy_meter.information_source_signal import ModelLoss
    from privacy_meter.metric import ReferenceMetric
    from privacy_meter.model import PytorchModelTensor

    import_seconds = time.perf_counter() - start
    pack = torch.load(path_in, weights_only=False)
    loss = torch.nn.CrossEntropyLoss()
    dataset = Dataset(
        data_dict={
            "train": {"x": pack["x_in"], "y": pack["y_in"]},
            "test": {"x": pack["x_out"], "y": pack["y_out"]},
        },
        default_input="x",
        default_output="y",
    )
    tests = {}
    for func in (linear_itp_threshold_func, logit_rescale_threshold_func):
        start = time.perf_counter()
        target = InformationSource(models=[PytorchModelTensor(pack["target"], loss)], datasets=[dataset])
        references = InformationSource(
            models=[PytorchModelTensor(m, loss) for m in pack["references"]], datasets=[dataset]
        )
        metric = ReferenceMetric(
            target_info_source=target,
            reference_info_source=references,
            signals=[ModelLoss()],
            hypothesis_test_func=func,
        )
        audit = Audit(
            metrics=metric,
            inference_game_type=InferenceGame.PRIVACY_LOSS_MODEL,
            target_info_sources=target,
            reference_info_sources=references,
            fpr_tolerances=list(pack["alphas"]),
            save_logs=False,
        )
        audit.prepare()
        (result,) = audit.run()[0]
        seconds = time.perf_counter() - start
        tests[func.__name__] = {
            "seconds": seconds,
            "roc_auc": float(result.roc_auc),
            "member_counts": result.predicted_labels.sum(0).astype(int).tolist(),
        }
    out = {
        "version": version("privacy-meter"),
        "torch": torch.__version__,
        "tensorflow": tf.__version__,
        "import_seconds": import_seconds,
        "tests": tests,
    }
    with open(path_out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
