
variable "v" {
  type = string
}

resource "terraform_data" "deep" {
  count = 1
  input = var.v
}
