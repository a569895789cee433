"""django-tasks-db's side of the comparison: a Django project, its tasks and its driver."""
