
variable "a" {
  default = "a0"
}

variable "b" {
  default = "b0"
}

resource "terraform_data" "a" {
  input = var.a
}

resource "terraform_data" "b" {
  input = var.b
}

check "a_ok" {
  assert {
    condition     = terraform_data.a.output != "bad"
    error_message = "a is bad"
  }
}

check "b_ok" {
  assert {
    condition     = terraform_data.b.output != "bad"
    error_message = "b is bad"
  }
}
