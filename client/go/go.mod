// The requirements are those gRPC-Go 1.33.3 (Debian 12's) and protobuf-go
// 1.28.1 select; debian-vendor.sh builds the module offline from Debian's
// sources of them. The path is served by no proxy: see README.md.
module sortd.io/client/go

go 1.19

require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

require (
	github.com/golang/protobuf v1.5.2 // indirect
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.5.0 // indirect
	golang.org/x/text v0.7.0 // indirect
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013 // indirect
)
