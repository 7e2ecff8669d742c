
variable "a" {
  default = "a0"
}

resource "terraform_data" "a" {
  input = var.a
}

resource "terraform_data" "d" {
  input = "d0"
}

output "a" {
  value = terraform_data.a.output
}
