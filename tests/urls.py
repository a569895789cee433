from django.contrib import admin
from django.urls import include, path

from tests.testapp import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/", include("durable_jobs.urls")),
    path("async/enqueue/", views.enqueue_async),
    path("async/delay/", views.delay_in_async_view),
]
