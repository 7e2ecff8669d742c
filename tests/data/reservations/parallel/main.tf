
variable "a" {
  default = "a0"
}

variable "b" {
  default = "b0"
}

data "terraform_remote_state" "ext" {
  backend = "local"
  config  = { path = "${path.module}/ext.tfstate" }
}

resource "terraform_data" "a" {
  input = var.a
}

resource "terraform_data" "b" {
  input = "${var.b}-${data.terraform_remote_state.ext.outputs.x}"
}

output "a" {
  value = terraform_data.a.output
}

output "b" {
  value = terraform_data.b.output
}

output "ab" {
  value = "${terraform_data.a.output}|${terraform_data.b.output}"
}

check "b_not_bad" {
  assert {
    condition     = terraform_data.b.output != "bad"
    error_message = "b is bad"
  }
}
