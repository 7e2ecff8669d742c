
variable "secret" {
  type      = string
  sensitive = true
  default   = "s0"
}

variable "p" {
  default = "p0"
}

resource "terraform_data" "s" {
  input = { user = "u", password = var.secret, list = ["x", var.secret] }
}

resource "terraform_data" "p" {
  input = var.p
}

output "s" {
  value     = terraform_data.s.output
  sensitive = true
}

output "p" {
  value = terraform_data.p.output
}
