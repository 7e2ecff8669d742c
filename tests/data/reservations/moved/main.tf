
variable "keep" {
  default = "k0"
}

resource "terraform_data" "old" {
  input = "o"
}

resource "terraform_data" "keep" {
  input = var.keep
}
