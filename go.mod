module github.com/oncegate/oncegate

go 1.26.8

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
