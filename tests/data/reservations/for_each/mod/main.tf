
variable "value" {
  type = string
}

resource "terraform_data" "r" {
  input = var.value
}

module "inner" {
  source = "./inner"
  v      = terraform_data.r.output
}

output "out" {
  value = terraform_data.r.output
}
