
variable "a" {
  default = "a0"
}

resource "terraform_data" "a" {
  input = var.a
}

output "a" {
  value = terraform_data.a.output
}
