
variable "b" {
  default = "b0"
}

variable "c" {
  default = "c0"
}

resource "terraform_data" "b" {
  input = var.b
}

resource "terraform_data" "c" {
  input = "${var.c}:${terraform_data.b.output}"
}
