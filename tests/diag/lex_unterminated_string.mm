// expected-error@+1:8 {{unterminated string}}
import "nn.mm
