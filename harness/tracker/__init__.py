"""Results in the team's experiment tracker (MLflow): what it keeps of a run and each attempt (pure), the one
module that imports mlflow, and the export that finds a run again by its tags."""
