from django.urls import path

from tenants.api import views

urlpatterns = [
    path("tokens", views.TokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:pk>", views.TokenDetailView.as_view(), name="api-token"),
    path("signing-key", views.SigningKeyView.as_view(), name="api-signing-key"),
    path("signing-key:rotate", views.SigningKeyRotateView.as_view(), name="api-signing-key-rotate"),
]
