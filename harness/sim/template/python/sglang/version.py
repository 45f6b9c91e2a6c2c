__version__ = "0.5.23"

if __name__ == "__main__":
    print(__version__)
