module github.com/redlock-proxy/redlock-proxy

go 1.26.8

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/redcon v1.6.4 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/automaxprocs v1.6.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)
