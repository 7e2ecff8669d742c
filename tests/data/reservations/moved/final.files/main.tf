
variable "keep" {
  default = "k0"
}

resource "terraform_data" "new" {
  input = "o"
}

moved {
  from = terraform_data.old
  to   = terraform_data.new
}

resource "terraform_data" "keep" {
  input = var.keep
}
