module qsp

go 1.19
