
variable "gen" {
  type    = map(string)
  default = {}
}

resource "terraform_data" "n" {
  for_each = toset(["x", "y"])
  input    = lookup(var.gen, each.key, "0")
}

resource "terraform_data" "c" {
  count = 2
  input = lookup(var.gen, "c${count.index}", "0")
}

module "m" {
  source   = "./mod"
  for_each = toset(["p", "q"])
  value    = lookup(var.gen, each.key, "0")
}

output "n" {
  value = { for key, item in terraform_data.n : key => item.output }
}

output "m" {
  value = { for key, item in module.m : key => item.out }
}

output "c" {
  value = terraform_data.c[*].output
}
