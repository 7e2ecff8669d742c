"""The Terraform/OpenTofu HTTP backend lane (C{/v1/states})."""
