"""Membership inference: per-sample signals of stacked models, threshold attacks, LiRA, RMIA,
metrics (ROC with torchmetrics, TPR at low FPR) and an empirical ε lower bound. Library modules
only; the attack registry, threat views and tasks call them (see ``README.md`` here)."""
