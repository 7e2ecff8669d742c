# A small module for the example test: built-in terraform_data resources only,
# so Terraform needs no provider download.

variable "environment" {
  type    = string
  default = "dev"
}

resource "terraform_data" "network" {
  input = {
    name = "${var.environment}-network"
    cidr = "10.0.0.0/16"
  }
}

resource "terraform_data" "subnet" {
  for_each = toset(["a", "b"])
  input    = "${terraform_data.network.output.name}-${each.key}"
}

output "network_name" {
  value = terraform_data.network.output.name
}

output "subnets" {
  value = sort([for subnet in terraform_data.subnet : subnet.output])
}

output "admin_token" {
  value     = "token-for-${var.environment}"
  sensitive = true
}
