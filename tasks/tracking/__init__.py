"""Experiment trackers — TensorBoard, MLflow, Weights & Biases — fed from the run's record.

The run folder (catalog, manifests, gate reports) stays the record; a tracker is a view of it where an RL team
already looks. When a stage ends (``flows.stage.StageRun.finish``), ``publish_run`` sends every ended stage a backend
has not taken yet to each of the profile's ``tracking.backends`` (``TrackingSettings``): one tracker run per pipeline
run — its id kept in ``<run>/tracking/state.json``, so a resumed run continues it — with the run id, profile, config
hash and commit as tags. Each stage's training curves, evals, gate criteria and report metrics go under its own
prefix, and a sample of its trajectories as a table (``tasks.tracking.record``). Backends are a registry
(``tasks.tracking.trackers.TRACKERS``); failures are warnings (``tasks.tracking.publish``).

    from tasks.tracking.publish import publish_run
    links = publish_run(store, TrackingSettings(backends=(TrackerName.MLFLOW, TrackerName.TENSORBOARD)))

Only the contract is imported here (the profile's config reads it; the backends' libraries load when used).
"""

from tasks.tracking.contract import TrackerName, TrackingSettings

__all__ = ["TrackerName", "TrackingSettings"]
