from django.urls import path

from tenants.api import views

urlpatterns = [
    path("tokens", views.TokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:pk>", views.TokenDetailView.as_view(), name="api-token"),
]
