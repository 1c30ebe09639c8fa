acl = "read"
key_prefix "app/" {
  policy = "write"
}
key "app/secret" {
  policy = "deny"
}
service "web" {
  policy     = "write"
  intentions = "read"
}
node_prefix "" {
  policy = "read"
}
operator = "read"
