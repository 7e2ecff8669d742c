
variable "t_gen" {
  default = 1
}

variable "t_fail" {
  default = false
}

variable "d_gen" {
  default = 1
}

variable "d_fail" {
  default = false
}

variable "other" {
  default = "o0"
}

# A replacement whose provisioner fails leaves the new object tainted.
resource "terraform_data" "t" {
  triggers_replace = var.t_gen

  provisioner "local-exec" {
    command = var.t_fail ? "exit 1" : "true"
  }
}

# With create_before_destroy it leaves the old object deposed as well.
resource "terraform_data" "d" {
  triggers_replace = var.d_gen

  lifecycle {
    create_before_destroy = true
  }

  provisioner "local-exec" {
    command = var.d_fail ? "exit 1" : "true"
  }
}

resource "terraform_data" "other" {
  input = var.other
}
